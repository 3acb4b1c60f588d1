"""Every content kind at once, with fixed bytes that the Rust test computes too."""

import warden

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
WAV = b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(range(255, -1, -1))


def rich() -> list[str | warden.Image | warden.Audio | warden.File | warden.Link]:
    """Text, an image, audio, a text file, a binary file and a link."""
    return [
        "look: ünïcödé ✓",
        warden.Image(PNG),
        warden.Audio(WAV),
        warden.File("# Notes\nline 2 ✓\n", name="notes.md"),
        warden.File(bytes(range(256)), name="all.bin"),
        warden.Link("https://example.com/reports/r1", name="r1"),
    ]

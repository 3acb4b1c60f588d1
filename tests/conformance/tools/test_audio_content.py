import struct

from warden import Audio


def test_audio_content() -> Audio:
    """Returns a tenth of a second of silence as a WAV file."""
    rate, samples = 8000, 800
    data = b"\x00\x00" * samples
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE"
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return Audio(header + fmt + b"data" + struct.pack("<I", len(data)) + data)

import binascii

from warden import File, Image

RED_PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def test_multiple_content_types() -> list[str | Image | File]:
    """Returns text, an image and an embedded JSON resource."""
    return [
        "Multiple content types test:",
        Image(binascii.a2b_base64(RED_PIXEL)),
        File(
            '{"test":"data","value":123}',
            uri="test://mixed-content-resource",
            mime_type="application/json",
        ),
    ]

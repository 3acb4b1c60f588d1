import binascii

from warden import Image

RED_PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def test_image_content() -> Image:
    """Returns a 1x1 red PNG image."""
    return Image(binascii.a2b_base64(RED_PIXEL))

from warden import File


def test_embedded_resource() -> File:
    """Returns an embedded text resource."""
    return File(
        "This is an embedded resource content.",
        uri="test://embedded-resource",
        mime_type="text/plain",
    )

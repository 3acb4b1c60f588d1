def test_simple_text() -> str:
    """Returns a simple text response."""
    return "This is a simple text response for testing."

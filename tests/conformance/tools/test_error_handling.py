from warden import ToolError


def test_error_handling() -> str:
    """Always fails, with a message for the caller."""
    raise ToolError("This tool intentionally returns an error for testing")

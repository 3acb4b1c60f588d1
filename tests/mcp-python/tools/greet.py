def greet(name: str) -> str:
    """Greets someone."""
    return f"hello, {name} ✓"

def greet(name: str) -> str:
    """Greets someone at once: never a task."""
    return f"Hello, {name}!"

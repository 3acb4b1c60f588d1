import warden


def refuse(n: int) -> int:
    """Refuses negative numbers, in plain words."""
    if n < 0:
        raise warden.ToolError(f"n must be 0 or more, not {n}")
    return n

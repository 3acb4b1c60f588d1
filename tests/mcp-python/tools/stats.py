def stats(values: list[float]) -> dict:
    """Count and mean of some numbers."""
    return {"count": len(values), "mean": sum(values) / len(values), "label": "mëan"}

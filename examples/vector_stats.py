"""Statistics of a numeric vector, computed with numpy."""

import numpy as np


def vector_stats(values: list[float]) -> dict:
    """Describe a vector of numbers.

    Args:
        values: The numbers.

    Returns:
        The mean, the standard deviation and the L2 norm.
    """
    v = np.asarray(values, dtype=float)
    return {"mean": v.mean(), "std": v.std(), "norm": np.linalg.norm(v)}

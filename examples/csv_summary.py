"""Summarize one numeric column of a CSV document."""

import csv
import io
import statistics


def csv_summary(csv_text: str, column: str) -> dict:
    """Summarize a numeric column of CSV text.

    Args:
        csv_text: The CSV document, with a header row.
        column: The name of the numeric column to summarize.

    Returns:
        Count, mean, median, standard deviation, minimum and maximum.
    """
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    if not rows:
        raise ValueError("the CSV has no data rows")
    if column not in rows[0]:
        raise KeyError(f"no column {column!r}; columns: {', '.join(rows[0])}")
    values = [float(row[column]) for row in rows]
    return {
        "count": len(values),
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }

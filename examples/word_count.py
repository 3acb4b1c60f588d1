"""Count words in a text."""

from collections import Counter


def word_count(text: str, top: int = 3) -> list:
    """Count the most common words of a text.

    Args:
        text: Any text.
        top: How many of the most common words to return.

    Returns:
        Pairs of word and count, most common first.
    """
    words = [w.strip(".,;:!?").lower() for w in text.split()]
    return Counter(w for w in words if w).most_common(top)

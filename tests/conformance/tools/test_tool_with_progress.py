import time

import warden


def test_tool_with_progress() -> str:
    """Reports progress 0, 50 and 100 out of 100, 50 ms apart."""
    warden.progress(0, 100)
    time.sleep(0.05)
    warden.progress(50, 100)
    time.sleep(0.05)
    warden.progress(100, 100)
    return "Progress reported"

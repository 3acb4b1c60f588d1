import time

import warden


def steps() -> str:
    """Reports its progress, with a repeat and a step back the host must drop."""
    for done in (0, 25, 25, 10, 50, 75, 100):
        warden.progress(done, 100, f"at {done}")
        time.sleep(0.02)
    return "done"

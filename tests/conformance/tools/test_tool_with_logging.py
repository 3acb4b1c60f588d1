import logging
import time

log = logging.getLogger("conformance")


def test_tool_with_logging() -> str:
    """Logs three messages at info level, 50 ms apart."""
    log.info("Tool execution started")
    time.sleep(0.05)
    log.info("Tool processing data")
    time.sleep(0.05)
    log.info("Tool execution completed")
    return "Logged three messages"

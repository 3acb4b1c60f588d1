import logging

log = logging.getLogger("conformance")


def test_logging_tool() -> str:
    """Logs one message at info level: sent only to a request that asked for a log level."""
    log.info("a record at info level")
    return "logged once"

import logging

log = logging.getLogger("tool.logs")


def logs() -> str:
    """Logs at four levels."""
    log.debug("fine detail")
    log.info("started")
    log.warning("careful")
    log.error("went wrong")
    return "logged"

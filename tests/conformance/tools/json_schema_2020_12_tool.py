from typing import TypedDict


class Address(TypedDict, total=False):
    """A postal address."""

    street: str
    city: str


def json_schema_2020_12_tool(name: str | None = None, address: Address | None = None) -> str:
    """Tool with JSON Schema 2020-12 features.

    Args:
        name: A name.
        address: An address.
    """
    return f"{name} at {address}"

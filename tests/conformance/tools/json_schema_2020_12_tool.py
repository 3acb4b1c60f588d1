from typing import TypedDict


# Lower-case: the suite looks for the definition "address" in $defs, which is named
# after the class.
class address(TypedDict, total=False):  # noqa: N801
    """A postal address."""

    street: str
    city: str


def json_schema_2020_12_tool(name: str | None = None, address: address | None = None) -> str:
    """Tool with JSON Schema 2020-12 features.

    Args:
        name: A name.
        address: An address.
    """
    return f"{name} at {address}"

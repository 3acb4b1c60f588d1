"""A tool registered with a hand-written schema (its `.schema.json` beside it): JSON
Schema 2020-12 keywords a signature cannot express (allOf/anyOf, if/then/else, $anchor)
must reach the client as written."""


def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict | None = None,
    contactMethod: str | None = None,  # noqa: N803
    phone: str | None = None,
    email: str | None = None,
) -> str:
    """Tool with JSON Schema 2020-12 features.

    Args:
        name: A name.
        address: An address.
        contactMethod: How to reach the person.
        phone: A phone number.
        email: An email address.
    """
    how = phone if contactMethod == "phone" else email
    return f"{name} at {address}, reachable at {how}"

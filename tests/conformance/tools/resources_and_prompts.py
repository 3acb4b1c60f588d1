"""The conformance suite's resources-*, prompts-* and completion scenarios, written as a
FastMCP server file: one tool, and the resources and prompts the suite reads beside it."""

import base64
from typing import Literal

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("conformance")

# A 1x1 PNG, drawn for this file.
DOT = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNQSFjwHwAD5AIge4YO3AAAAABJRU5ErkJggg=="


@mcp.tool()
def offerings() -> str:
    """What this file serves besides this tool."""
    return "four resources, one template and four prompts"


@mcp.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A fixed text."""
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A fixed image, as bytes."""
    return base64.b64decode(DOT)


@mcp.resource("test://watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients subscribe to: announced as updated when this file changes."""
    return "Watched resource content."


@mcp.resource("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> dict:
    """The data of one id."""
    return {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}


@mcp.prompt(name="test_simple_prompt")
def simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


@mcp.prompt(name="test_prompt_with_arguments")
def prompt_with_arguments(arg1: Literal["testValue1", "other"], arg2: str) -> str:
    """A prompt with two arguments.

    Args:
        arg1: The first argument.
        arg2: The second argument.
    """
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@mcp.prompt(name="test_prompt_with_embedded_resource")
def prompt_with_embedded_resource(resourceUri: str) -> list:
    """A prompt that embeds a resource."""
    resource = {"uri": resourceUri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}
    return [
        {"role": "user", "content": {"type": "resource", "resource": resource}},
        "Please process the embedded resource above.",
    ]


@mcp.prompt(name="test_prompt_with_image")
def prompt_with_image() -> list:
    """A prompt that shows an image."""
    return [
        {"role": "user", "content": {"type": "image", "data": DOT, "mimeType": "image/png"}},
        "Please analyze the image above.",
    ]

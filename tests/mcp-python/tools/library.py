"""A small library served the way FastMCP serves one: a tool, a static resource, a
templated text resource, a binary one, and a prompt with arguments and completions."""

from typing import Literal

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("library")

BOOKS = {"9780141439518": "Pride and Prejudice", "9780486282114": "Frankenstein ✓"}


@mcp.tool()
def find_book(word: str) -> list[str]:
    """The ISBNs of the books whose title holds a word."""
    return sorted(isbn for isbn, title in BOOKS.items() if word.lower() in title.lower())


@mcp.resource("library://shelves", mime_type="application/json")
def shelves() -> dict:
    """Every book, by ISBN."""
    return {"fiction": sorted(BOOKS)}


@mcp.resource("library://books/{isbn}", description="A book's title.")
def book(isbn: str) -> str:
    return BOOKS[isbn]


@mcp.resource("library://covers/{isbn}", mime_type="image/png")
def cover(isbn: str) -> bytes:
    """A book's cover."""
    return b"\x89PNG\r\n\x1a\n" + isbn.encode() + bytes(range(256))


@mcp.prompt()
def review(isbn: str, tone: Literal["kind", "harsh"] = "kind") -> str:
    """Asks for a review of a book."""
    return f"Write a {tone} review of {BOOKS[isbn]}."

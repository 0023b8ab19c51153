"""An MCP tool's result as the text a model reads (docs/tools.md#results)."""

from __future__ import annotations

import json

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

from chaz.errors import McpResultTooLarge


def result_text(server: str, tool: str, result: CallToolResult, max_bytes: int) -> str:
    """The result's text parts, one after another; a binary part (an image, audio,
    a blob) is named with its size, not inlined. Structured content stands in
    when there is no text. :class:`~chaz.errors.McpResultTooLarge` past ``max_bytes``
    (the server's ``max_result_bytes``); under it, the registry cuts the text to
    CHAZ_MAX_CONTENT_BYTES as it does any tool's."""
    parts: list[str] = []
    size = 0
    for block in result.content:
        if isinstance(block, TextContent):
            part = block.text
        elif isinstance(block, ImageContent | AudioContent):
            part = f"[{block.type} {block.mime_type}, {len(block.data)} base64 characters omitted]"
        elif isinstance(block, ResourceLink):
            part = f"[resource {block.uri}]"
        elif isinstance(block, EmbeddedResource):
            res = block.resource
            if isinstance(res, BlobResourceContents):
                part = f"[resource {res.uri}, {len(res.blob)} base64 characters omitted]"
            else:
                part = res.text
        else:
            part = f"[{getattr(block, 'type', 'content')} omitted]"
        size += len(part.encode("utf-8", "replace")) + 1
        if size > max_bytes:
            raise _too_large(server, tool, max_bytes)
        parts.append(part)
    if not parts and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
        if len(text.encode("utf-8", "replace")) > max_bytes:
            raise _too_large(server, tool, max_bytes)
        return text
    return "\n".join(parts)


def _too_large(server: str, tool: str, max_bytes: int) -> McpResultTooLarge:
    return McpResultTooLarge(
        f"{server}.{tool} returned more than max_result_bytes={max_bytes} bytes: refused",
        server=server,
        max_bytes=max_bytes,
    )

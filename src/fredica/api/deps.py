"""What the routes depend on (FastAPI `Depends`): the node service and the request's publisher.

A route declares `node: deps.NodeDep` and calls one use case on it; nothing here or in the
routes touches a store.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fredica import auth
from fredica.node.service import Node


def get_node(request: Request) -> Node:
    """The node whose app answers this request (`app.state.node`, set by `create_app`)."""
    node = request.app.state.node
    assert isinstance(node, Node)
    return node


def get_publisher(request: Request) -> auth.Publisher | None:
    """Who sent this request in token mode (set by the token middleware); None otherwise."""
    publisher = getattr(request.state, "publisher", None)
    assert publisher is None or isinstance(publisher, auth.Publisher)
    return publisher


NodeDep = Annotated[Node, Depends(get_node)]
PublisherDep = Annotated[auth.Publisher | None, Depends(get_publisher)]

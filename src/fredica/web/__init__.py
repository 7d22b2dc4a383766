"""The web UI every node serves: the processing center (`/processing`), pipeline detail pages
with the DAG, and the tools page (`/tools`), plus the endpoints only the UI needs (server-sent
events, crash-recovery answer, result files). Plain HTML/CSS/ES modules: no build step."""

from __future__ import annotations

"""What a node can run: executors by task type and pipeline templates by name.

Plugins are importable modules named in worker.yaml (`plugins:`); each defines
`register(registry: Registry) -> None` and adds executors and templates there.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from fredica.domain import errors
from fredica.domain.spawn import SpawnHook
from fredica.executors import network_test
from fredica.executors.base import TaskExecutor
from fredica.pipelines import dubbing, media, templates, video
from fredica.pipelines import subtitles as subtitle_pipelines
from fredica.pipelines.templates import Template


class Registry:
    def __init__(self) -> None:
        self._executors: dict[str, TaskExecutor] = {}
        self._templates: dict[str, Template] = {}

    # executors
    def add_executor(self, executor: TaskExecutor) -> None:
        self._executors[executor.task_type] = executor

    def executor(self, task_type: str) -> TaskExecutor | None:
        return self._executors.get(task_type)

    @property
    def task_types(self) -> frozenset[str]:
        return frozenset(self._executors)

    def pausable_map(self) -> dict[str, bool]:
        return {t: e.pausable for t, e in self._executors.items()}

    # templates
    def add_template(self, template: Template) -> None:
        self._templates[template.name] = template

    def template(self, name: str) -> Template:
        try:
            return self._templates[name]
        except KeyError:
            known = ", ".join(sorted(self._templates))
            raise errors.InvalidRequest(
                f"unknown template {name!r}; known templates: {known}"
            ) from None

    @property
    def template_names(self) -> list[str]:
        return sorted(self._templates)

    def spawn_hook(self, template_name: str) -> SpawnHook | None:
        """The template's post-completion hook, or None when it has none (the store then does
        not load the pipeline's tasks for every completion)."""
        template = self._templates.get(template_name)
        if template is None or type(template).on_task_completed is Template.on_task_completed:
            return None
        return template.on_task_completed

    # plugins
    def load_plugins(self, modules: Iterable[str]) -> None:
        for name in modules:
            try:
                module = importlib.import_module(name)
            except Exception as exc:
                raise errors.ConfigError(f"plugins: cannot import {name!r}: {exc}") from exc
            register = getattr(module, "register", None)
            if not callable(register):
                raise errors.ConfigError(
                    f"plugins: module {name!r} has no register(registry) function"
                )
            register(self)


def builtin_registry() -> Registry:
    """A registry with every built-in executor and template."""
    registry = Registry()
    registry.add_executor(network_test.NetworkTestExecutor())
    templates.register_builtin(registry)
    media.register_media(registry)
    subtitle_pipelines.register_subtitles(registry)
    dubbing.register_dubbing(registry)
    video.register_video(registry)
    return registry

"""The unit of work is the one way in: every repository class is an attribute of it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import worker.store.repositories as repositories
from worker.app import App


def _repository_classes() -> set[type]:
    found: set[type] = set()
    for info in pkgutil.iter_modules(repositories.__path__):
        module = importlib.import_module(f"{repositories.__name__}.{info.name}")
        found |= {cls for name, cls in inspect.getmembers(module, inspect.isclass)
                  if name.endswith("Repository") and cls.__module__ == module.__name__}
    return found


def test_every_repository_is_reachable_from_the_unit_of_work(sqlite_app: App) -> None:
    classes = _repository_classes()
    assert len(classes) >= 9  # the walk found the package's repositories, not nothing
    with sqlite_app.uow() as uow:
        reachable = {type(value) for value in vars(uow).values()}
        assert all(getattr(value, "session", uow.session) is uow.session
                   for value in vars(uow).values() if type(value) in classes)
    missing = sorted(cls.__name__ for cls in classes - reachable)
    assert missing == [], f"add to worker/store/uow.py: {', '.join(missing)}"

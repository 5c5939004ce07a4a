"""The API's routers, one per area; ``create_api`` includes every router in ``ROUTERS``.

To add an area (as the review API and the dashboard's pages do): write a module with
``router = fastapi.APIRouter(...)``, take the App and the caller from ``worker.api.deps``
(``DreamApp``, ``Caller``, ``scope_for``), raise ``worker.errors`` classes (one handler maps
them to status codes), and append its router to ``ROUTERS`` (an HTML page's to ``PAGES`` too:
every other route refuses a query parameter it does not take, ``deps.known_query``; a page
refuses a field it reads given twice, ``deps.page_fields_once``).
"""

from __future__ import annotations

from fastapi import APIRouter

from worker.api import dashboard, review_page, review_routes
from worker.api.routers import forgetting, notes, ops, runs

ROUTERS: tuple[APIRouter, ...] = (
    forgetting.router, notes.router, runs.router, ops.router,
    review_routes.router,  # the review helper's: /api/review
    dashboard.router, review_page.router,  # HTML pages (no schema)
)
# A browser's pages: a query they do not read (a bookmark's leftovers) changes nothing shown.
PAGES: tuple[APIRouter, ...] = (dashboard.router, review_page.router)

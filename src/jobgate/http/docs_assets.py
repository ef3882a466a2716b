"""`/docs` (Swagger UI) and `/redoc` (ReDoc), with their scripts and styles served by jobgate
from the `fastapi-offline` package: the API docs work on a machine without internet."""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import APIRouter
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse, Response

from jobgate import errors

ASSETS_PATH = "/docs/assets"
# name -> media type; nothing else under the package's static folder is served.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
_CACHE = "public, max-age=86400"

router = APIRouter(include_in_schema=False)


# ReDoc's sidebar shows a logo from its vendor's CDN: point it at the local favicon, so that
# reading the docs never makes a request off this server.
_REWRITES = {
    "redoc.standalone.js": (
        b"https://cdn.redoc.ly/redoc/logo-mini.svg",
        ASSETS_PATH.encode() + b"/favicon.png",
    )
}


@functools.cache
def _asset_bytes(name: str) -> bytes:
    content = (resources.files("fastapi_offline") / "static" / name).read_bytes()
    if name in _REWRITES:
        content = content.replace(*_REWRITES[name])
    return content


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="jobgate API",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
        swagger_ui_parameters={"persistAuthorization": True, "displayRequestDuration": True},
    )


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    return get_redoc_html(
        openapi_url="/openapi.json",
        title="jobgate API",
        redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
        redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
        with_google_fonts=False,
    )


@router.get(ASSETS_PATH + "/{name}")
async def asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise errors.NotFound("docs asset", name)
    return Response(_asset_bytes(name), media_type=media_type, headers={"Cache-Control": _CACHE})

"""The HTTP anchor: the plainest durable Python endpoint, FastAPI + uvicorn + asyncpg.

`POST /v1/jobs` is one INSERT (its own commit) and `GET /v1/jobs/{id}` one primary-key
SELECT, answering JSON; no auth, no validation beyond FastAPI's own. jobgate's submit and
status are measured against it with the same load generator and settings (bench.http_bench),
so the ratio says what jobgate's work per request costs above the floor of the stack.

Run as `python -m bench.peers.fastapi_anchor DSN`: prints `listening on http://...` like a
jobgate API process, then serves until stopped.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

TABLE = """
CREATE TABLE IF NOT EXISTS anchor_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status text NOT NULL DEFAULT 'queued',
    request jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
POOL_SIZE = 10  # asyncpg's default; jobgate's API pool is of the same order


async def prepare(dsn: str, rows: int) -> list[str]:
    """The table, and `rows` jobs for the status load to read (their ids)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(TABLE)
        ids = await conn.fetch(
            "INSERT INTO anchor_jobs (request) SELECT '{}'::jsonb FROM generate_series(1, $1) "
            "RETURNING id",
            rows,
        )
        return [str(row["id"]) for row in ids]
    finally:
        await conn.close()


def create_app(dsn: str) -> FastAPI:
    pool: dict[str, asyncpg.Pool] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        pool["db"] = await asyncpg.create_pool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE)
        yield
        await pool["db"].close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/jobs", status_code=202)
    async def submit(body: dict[str, Any]) -> Response:
        row = await pool["db"].fetchrow(
            "INSERT INTO anchor_jobs (request) VALUES ($1::jsonb) RETURNING id, status",
            orjson.dumps(body).decode(),
        )
        return Response(
            orjson.dumps({"id": str(row["id"]), "status": row["status"]}),
            status_code=202,
            media_type="application/json",
        )

    @app.get("/v1/jobs/{job_id}")
    async def status(job_id: int, request: Request) -> Response:
        row = await pool["db"].fetchrow(
            "SELECT id, status, created_at FROM anchor_jobs WHERE id = $1", job_id
        )
        if row is None:
            return Response(b'{"detail":"not found"}', status_code=404)
        return Response(
            orjson.dumps({"id": str(row["id"]), "status": row["status"]}),
            media_type="application/json",
        )

    return app


def main() -> None:
    dsn = sys.argv[1]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        create_app(dsn), loop="uvloop", http="httptools", access_log=False, log_level="warning"
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()

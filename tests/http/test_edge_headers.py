"""The request's header fields as http.middleware.edge_limits reads them (uvicorn's reading,
inlined): names lower-cased, trailing whitespace dropped from values, order and repeats kept, and
`Expect: 100-continue` noted in any case."""

from __future__ import annotations

from tests.http.test_edge_writes import connection, served


async def test_header_fields_reach_the_app_as_uvicorn_reads_them() -> None:
    protocol, _ = await connection()
    protocol.data_received(
        b"GET /job HTTP/1.1\r\nHost: x\r\nX-Thing: a b \t\r\nx-thing: second\r\n"
        b"Authorization: Bearer k\r\n\r\n"
    )
    assert protocol.scope["headers"] == [
        (b"host", b"x"),
        (b"x-thing", b"a b"),
        (b"x-thing", b"second"),
        (b"authorization", b"Bearer k"),
    ]
    assert protocol.expect_100_continue is False
    await served(protocol)
    protocol.data_received(
        b"POST /job HTTP/1.1\r\nHost: x\r\nEXPECT: 100-Continue  \r\nContent-Length: 2\r\n\r\n"
    )
    assert protocol.expect_100_continue is True
    assert protocol.scope["headers"][1] == (b"expect", b"100-Continue")
    protocol.connection_lost(None)

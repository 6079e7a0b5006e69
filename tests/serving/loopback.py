"""A replica on loopback for the router's edge tests: it answers each request as a test says, and records them."""

from __future__ import annotations

import asyncio


class Replica:
    """A loopback server that answers each request with what `answer` writes; it records what it received."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.connections = 0
        self.closed = asyncio.Event()
        self.received: list[bytes] = []

    async def __aenter__(self) -> Replica:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=2**20)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                if b"transfer-encoding: chunked" in head.lower():
                    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                        body += (await reader.readexactly(size + 2))[:-2]
                    await reader.readuntil(b"\r\n")
                self.received.append(head + body)
                if await self.answer(reader, writer, body) is False:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            writer.close()


async def ok(reader, writer, body) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nx-echo: yes\r\n\r\n%b" % (len(body) or 2, body or b"hi"))

"""A network cut between a client and Redis: a TCP proxy that holds what the client sends while
cut, and delivers it when the cut heals, as TCP's retransmissions do (the request reaches Redis
late, it is not lost)."""

from __future__ import annotations

import asyncio


class HoldingProxy:
    """127.0.0.1:`port` (from `start`) forwards to `target`; `hold` cuts, `heal` delivers."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.cut = False
        self.released = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, holds: bool) -> None:
            try:
                while data := await src.read(65536):
                    if holds and self.cut:
                        await self.released.wait()  # the bytes wait in the pipe, as in TCP's
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    def hold(self) -> None:
        self.cut = True
        self.released.clear()

    def heal(self) -> None:
        self.cut = False
        self.released.set()

    async def close(self) -> None:
        self.heal()
        if self.server:
            self.server.close()

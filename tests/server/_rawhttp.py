"""A minimal asyncio HTTP/1.1 client for load tests: httpx's connection pool costs O(pool) per request, so
1,200 requests over 200 connections took minutes in the client alone; this takes seconds."""
import asyncio


async def post_many(host, port, path, bodies, headers, connections):
    """POST each body (bytes) over `connections` keep-alive HTTP/1.1 connections; statuses in order."""
    todo = list(enumerate(bodies))[::-1]
    out = [None] * len(bodies)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    async def worker():
        reader = writer = None
        while todo:
            index, body = todo.pop()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{head}"
                              f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
                status_line = await reader.readline()
                length, close = 0, False
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    if name.lower() == "connection" and "close" in value.lower():
                        close = True
                payload = await reader.readexactly(length)
                out[index] = (int(status_line.split()[1]), payload)
                if close:
                    writer.close()
                    reader = writer = None
            except (OSError, asyncio.IncompleteReadError, IndexError, ValueError) as exc:
                out[index] = (type(exc).__name__, b"")
                if writer is not None:
                    writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return out

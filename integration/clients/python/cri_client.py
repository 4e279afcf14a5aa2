"""Calls a CRI endpoint with grpcio (from PyPI) and its default channel options.

grpcio >= 1.57 sends the socket path, percent-encoded, as the HTTP/2 :authority of a
`unix://` target; nothing here changes that. Requests and responses are plain protobuf bytes
read and written by hand, so no generated CRI code is needed.

Usage: python3 cri_client.py ENDPOINT
Prints one line per call, "OK <method> <fields>" or "FAIL <method> <code>: <details>", and
exits 1 if any call failed.
"""

import sys

import grpc


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def fields(msg):
    """(number, wire type, value) of each top-level field; value is bytes or an int."""
    i = 0
    while i < len(msg):
        key, i = varint(msg, i)
        num, typ = key >> 3, key & 7
        if typ == 0:
            val, i = varint(msg, i)
        elif typ == 2:
            n, i = varint(msg, i)
            val, i = msg[i : i + n], i + n
        elif typ == 1:
            val, i = msg[i : i + 8], i + 8
        elif typ == 5:
            val, i = msg[i : i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % typ)
        yield num, typ, val


def main():
    if len(sys.argv) != 2:
        print("usage: cri_client.py ENDPOINT", file=sys.stderr)
        return 2
    target = sys.argv[1]
    if not target.startswith("unix:"):
        target = "unix://" + target
    failed = False
    with grpc.insecure_channel(target) as channel:

        def call(method, request):
            nonlocal failed
            stub = channel.unary_unary(method)
            try:
                return stub(request, timeout=30)
            except grpc.RpcError as e:
                print("FAIL %s %s: %s" % (method, e.code().name, e.details()))
                failed = True
                return None

        # VersionRequest{version: "v1"}
        resp = call("/runtime.v1.RuntimeService/Version", b"\x0a\x02v1")
        if resp is not None:
            f = {n: v for n, t, v in fields(resp) if t == 2}
            print(
                "OK Version runtime_name=%s runtime_api_version=%s"
                % (f.get(2, b"").decode(), f.get(4, b"").decode())
            )
        resp = call("/runtime.v1.RuntimeService/ListPodSandbox", b"")
        if resp is not None:
            print("OK ListPodSandbox items=%d" % sum(1 for n, _, _ in fields(resp) if n == 1))
        resp = call("/runtime.v1.ImageService/ListImages", b"")
        if resp is not None:
            print("OK ListImages images=%d" % sum(1 for n, _, _ in fields(resp) if n == 1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A driver that drives no client: it answers every request as if it had succeeded
(a token for every acquire, ``released`` for every unlock, ``held`` always true) and
never sends a ``lost`` event. The engine's self-test runs scenarios with it: each must
fail, at the step that catches the lie."""

import json
import sys


def main() -> int:
    for line in sys.stdin:
        req = json.loads(line)
        op = req.get("op")
        body = {"id": req.get("id"), "ok": True}
        if op == "acquire":
            body["token"] = 1
        elif op == "acquire_multi":
            body["tokens"] = [1 for _ in req.get("keys", [])]
        elif op == "campaign":
            body["key"] = req.get("name")
        elif op == "unlock":
            body["result"] = "released"
        elif op == "held":
            body["held"] = True
        sys.stdout.write(json.dumps(body) + "\n")
        sys.stdout.flush()
        if op == "exit":
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

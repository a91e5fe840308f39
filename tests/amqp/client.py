#!/usr/bin/python3
"""An AMQP 1.0 client for the data-plane tests, on Debian's python3-qpid-proton.

Each command prints JSON lines on stdout and exits 0 when it did what it was asked:

  send     URL ADDRESS --count N [--body-prefix P]      {"sent": N, "accepted": N}; bodies P<first>..
           [--first K]                                  on a failure {"error": ..., "sent": n}
           [--presettled]                               (at most once: nothing is accepted)
  receive  URL ADDRESS --count N [--timeout S]          {"ready": true} once attached, then
                                                        {"body": ..., "repeat": bool} per
                                                        message until N distinct bodies
  query    URL TYPE                                     {"results": [{attr: value, ...}]}
  steady   URL ADDRESS --rate R --seconds S             a sender with acknowledgements and a
                                                        receiver, both reconnecting, until S
                                                        or SIGINT: one summary line
  idle     URL - --count N                              opens N connections (one process, one
                                                        reactor) and holds them, idle:
                                                        {"open": N} once all are open, then
                                                        {"closed": N} at SIGINT or SIGTERM
Options for every command: --user U --password P (SASL PLAIN), --mech M (allowed
mechanisms), --ca FILE --cert FILE --key FILE (TLS; amqps:// URLs), --timeout S (per
operation, default 10). A refused connection exits 2 with {"error": ...}.
"""

import argparse
import json
import sys
import time

try:
    from proton import Delivery, Message, SSLDomain, Timeout
    from proton.reactor import AtMostOnce
    from proton.utils import BlockingConnection, SyncRequestResponse
except ImportError as e:  # pragma: no cover - the message is for the person running the tests
    print(json.dumps({"error": f"python3-qpid-proton is missing ({e}): apt-get install python3-qpid-proton"}))
    sys.exit(3)


def out(obj):
    print(json.dumps(obj), flush=True)


def connect(args, url=None):
    kw = {"timeout": args.timeout}
    if args.user is not None:
        kw["user"] = args.user
        kw["password"] = args.password
    if args.mech:
        kw["allowed_mechs"] = args.mech
    if args.url.startswith("amqps://"):
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if args.ca:
            domain.set_trusted_ca_db(args.ca)
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if args.verify_host else SSLDomain.VERIFY_PEER, args.ca)
        else:
            domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
        if args.cert:
            domain.set_credentials(args.cert, args.key, None)
        kw["ssl_domain"] = domain
        if args.sni:
            kw["sni"] = args.sni
    return BlockingConnection(url or args.url, **kw)


def cmd_send(args):
    conn = connect(args)
    # Presettled (at most once) is how multicast is sent: the router forwards a copy to every
    # receiver and has no single outcome to return.
    sender = conn.create_sender(args.address, options=AtMostOnce() if args.presettled else None)
    n = 0
    try:
        for i in range(args.first, args.first + args.count):
            delivery = sender.send(Message(body=f"{args.body_prefix}{i}"), timeout=args.timeout)
            if not args.presettled and delivery.remote_state != Delivery.ACCEPTED:
                raise RuntimeError(f"message {i} was not accepted (outcome {delivery.remote_state})")
            n += 1
    except Exception as e:
        # How many went, so that a caller can go on from there.
        out({"error": f"{type(e).__name__}: {e}", "sent": n})
        sys.exit(2)
    out({"sent": n, "accepted": 0 if args.presettled else n})
    conn.close()


def accept(receiver):
    """Accepts the message just received; a presettled one (multicast) has nothing to settle
    (proton's BlockingReceiver keeps only unsettled deliveries and raises IndexError)."""
    try:
        receiver.accept()
    except IndexError:
        pass


def cmd_receive(args):
    """Receives until --count distinct bodies arrived (a repeated body is printed too, with
    "repeat": true)."""
    conn = connect(args)
    receiver = conn.create_receiver(args.address, credit=args.count)
    out({"ready": True})
    seen = set()
    while len(seen) < args.count:
        m = receiver.receive(timeout=args.timeout)
        accept(receiver)
        out({"body": m.body, "address": m.address, "repeat": m.body in seen})
        seen.add(m.body)
    conn.close()


def cmd_query(args):
    conn = connect(args)
    client = SyncRequestResponse(conn, "$management")
    request = Message(properties={"operation": "QUERY", "entityType": args.type, "type": "org.amqp.management",
                                  "name": "self"}, body={"attributeNames": []})
    response = client.call(request)
    body = response.body
    names = body["attributeNames"]
    out({"results": [dict(zip(names, row)) for row in body["results"]]})
    conn.close()


def cmd_steady(args):
    """Sends at --rate messages a second to one address until --seconds pass or SIGINT/SIGTERM
    comes, each send waiting for its acknowledgement; after a failure it reconnects (every
    0.2 s) and sends the unacknowledged message again, as clients do. A receiver on a
    connection of its own, reconnecting the same way, reads them. At the end (after waiting
    up to --timeout for the acknowledged messages to arrive) it prints one line: sent
    (attempts), acknowledged (outcome ACCEPTED), received (distinct), lost (acknowledged,
    never received), duplicates, reconnects, sends answered otherwise (MODIFIED, RELEASED:
    sent again), the longest gap between two acknowledgements in seconds, the failed tries of
    each client's first connection and attach ("first_attach_retries": not reconnects, no
    connection of it had been closed yet) and why each reconnect or retry came
    ("reconnect_reasons": who, seconds since the start, before or after its first attach,
    the error; the first 10)."""
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    received = set()
    duplicates = [0]
    done = threading.Event()
    reconnects = [0, 0]
    retries = [0, 0]
    modified = [0]
    began = time.monotonic()
    reasons = []

    def failed(who, attached, e):
        """Counts a failure of client `who` (0 sender, 1 receiver): a reconnect once it had
        been attached, a retry of its first attach before."""
        (reconnects if attached else retries)[who] += 1
        why = (f"{('sender', 'receiver')[who]} at {time.monotonic() - began:.1f} s"
               f" ({'after' if attached else 'before'} its first attach): {type(e).__name__}: {e}")
        print(why, file=sys.stderr, flush=True)
        if len(reasons) < 10:
            reasons.append(why)

    def receive_loop():
        attached = False
        while not done.is_set():
            conn = None
            try:
                conn = connect(args, args.receive_url)
                r = conn.create_receiver(args.address, credit=100)
                attached = True
                while not done.is_set():
                    try:
                        m = r.receive(timeout=0.5)
                    except Timeout:
                        continue
                    accept(r)
                    seq = int(str(m.body).rsplit("-", 1)[-1])
                    if seq in received:
                        duplicates[0] += 1
                    received.add(seq)
            except Exception as e:
                failed(1, attached, e)
                time.sleep(0.2)
            finally:
                close(conn)

    receiver = threading.Thread(target=receive_loop, daemon=True)
    receiver.start()
    time.sleep(1)
    sent = 0
    acked = []
    gap = 0.0
    interval = 1.0 / args.rate
    end = time.monotonic() + args.seconds
    conn = sender = None
    sender_attached = False
    last_ack = time.monotonic()
    while not stop.is_set() and time.monotonic() < end:
        seq = len(acked)
        try:
            if sender is None:
                conn = connect(args)
                sender = conn.create_sender(args.address)
                sender_attached = True
            sent += 1
            delivery = sender.send(Message(body=f"{args.body_prefix}-{seq}"), timeout=args.timeout)
            if delivery.remote_state != Delivery.ACCEPTED:
                # proton's BlockingSender raises only for REJECTED and RELEASED; the router
                # answers MODIFIED when the receiver's link went away with the message in
                # flight: not acknowledged, so sent again.
                modified[0] += 1
                continue
            now = time.monotonic()
            gap = max(gap, now - last_ack)
            last_ack = now
            acked.append(seq)
            stop.wait(interval)
        except Exception as e:
            failed(0, sender_attached, e)
            close(conn)
            conn = sender = None
            stop.wait(0.2)
    close(conn)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and not set(acked) <= received:
        time.sleep(0.1)
    done.set()
    lost = sorted(set(acked) - received)
    out({"sent": sent, "acknowledged": len(acked), "received": len(received), "lost": len(lost),
         "lost_first": lost[:10], "duplicates": duplicates[0], "sender_reconnects": reconnects[0],
         "receiver_reconnects": reconnects[1], "not_accepted": modified[0], "longest_gap_s": round(gap, 3),
         "first_attach_retries": retries[0] + retries[1], "reconnect_reasons": reasons})


def cmd_idle(args):
    import resource
    import signal

    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    # One descriptor per connection: raise the soft limit to the hard one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    class Idle(MessagingHandler):
        def __init__(self):
            super().__init__()
            self.opened = 0
            self.connections = []

        def on_start(self, event):
            for _ in range(args.count):
                self.connections.append(event.container.connect(args.url, reconnect=False))

        def on_connection_opened(self, event):
            self.opened += 1
            if self.opened == args.count:
                out({"open": self.opened})

        def on_transport_error(self, event):
            out({"error": f"transport: {event.transport.condition}", "open": self.opened})
            sys.exit(2)

    def stop(signum, frame):
        out({"closed": len(idle.connections)})
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    idle = Idle()
    Container(idle).run()


def close(conn):
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["send", "receive", "query", "steady", "idle"])
    p.add_argument("url")
    p.add_argument("target")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--body-prefix", default="m")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--mech")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--sni")
    p.add_argument("--verify-host", action="store_true")
    p.add_argument("--presettled", action="store_true")
    p.add_argument("--rate", type=float, default=20)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--receive-url", help="steady: the receiver's router (default: the sender's)")
    args = p.parse_args()
    args.address = args.target
    args.type = args.target
    try:
        {"send": cmd_send, "receive": cmd_receive, "query": cmd_query, "steady": cmd_steady, "idle": cmd_idle}[
            args.command
        ](args)
    except Exception as e:
        out({"error": f"{type(e).__name__}: {e}"})
        sys.exit(2)


if __name__ == "__main__":
    main()

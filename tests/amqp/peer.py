#!/usr/bin/env python3
"""An AMQP 1.0 peer that stands in for a broker behind a router's link route in the tests.

    peer.py --listen HOST:PORT

It accepts every connection (SASL ANONYMOUS, as a router's connector without credentials
offers) and every link; a link closed with an error (a routed link whose client went away)
ends alone, never the connection. It keeps one queue per address: a message sent on a link whose
target is that address is stored and then accepted; a link whose source is that address
takes the queue's messages in order, as its credit allows. Nothing is kept across restarts.

It prints one JSON line per event on stdout, unbuffered, for the test to read with
`kubectl logs`:
    {"listening": "HOST:PORT"}
    {"attach": "sender"|"receiver", "address": A, "container": C}  (our side of the link;
                                                                     C is the peer's container id)
    {"stored": A, "body": B}
    {"delivered": A, "body": B}

Uses Debian's python3-qpid-proton (the router image has it).
"""
import argparse
import collections
import json
import sys

from proton.handlers import MessagingHandler
from proton.reactor import Container


def out(value):
    print(json.dumps(value), flush=True)


class Peer(MessagingHandler):
    def __init__(self, url):
        super().__init__()
        self.url = url
        self.queues = collections.defaultdict(collections.deque)
        self.consumers = collections.defaultdict(list)

    def on_start(self, event):
        event.container.listen(self.url)
        out({"listening": self.url})

    def on_link_opening(self, event):
        link = event.link
        container = event.connection.remote_container
        if link.is_sender:
            address = link.remote_source.address
            link.source.address = address
            self.consumers[address].append(link)
            out({"attach": "sender", "address": address, "container": container})
        else:
            address = link.remote_target.address
            link.target.address = address
            out({"attach": "receiver", "address": address, "container": container})

    def forget(self, link):
        if link.is_sender:
            links = self.consumers.get(link.source.address, [])
            if link in links:
                links.remove(link)

    def on_link_closing(self, event):
        self.forget(event.link)

    def on_link_error(self, event):
        # A routed link the router detaches with an error (its client went away) ends that
        # link only; Proton's default would close the whole connection, and with it every
        # link route through it.
        self.forget(event.link)
        event.link.close()

    def on_disconnected(self, event):
        link = event.connection.link_head(0)
        while link:
            self.forget(link)
            link = link.next(0)

    def dispatch(self, link):
        queue = self.queues[link.source.address]
        while link.credit > 0 and queue:
            message = queue.popleft()
            link.send(message)
            out({"delivered": link.source.address, "body": message.body})

    def on_sendable(self, event):
        self.dispatch(event.link)

    def on_message(self, event):
        address = event.link.target.address
        self.queues[address].append(event.message)
        out({"stored": address, "body": event.message.body})
        for link in list(self.consumers.get(address, [])):
            self.dispatch(link)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, help="HOST:PORT")
    args = p.parse_args()
    try:
        Container(Peer(args.listen)).run()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

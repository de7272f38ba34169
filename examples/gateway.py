#!/usr/bin/env python3
"""Publish and subscribe through a padres broker's HTTP gateway, with Python's standard
library only. Start the broker with --http ADDR:PORT --http-gateway, then:

  python3 examples/gateway.py --url http://127.0.0.1:7781 subscribe "[class,eq,'quote']" --count 3
  python3 examples/gateway.py --url http://127.0.0.1:7781 publish \
      "a [class,eq,'quote'],[symbol,isPresent,''],[price,isPresent,0]" \
      "p [class,'quote'],[symbol,'IBM'],[price,120]"

`subscribe` prints one JSON object per line as `padres session` does: first the reply
with the subscription's id, then every notification (`--count N`: stop after N).
`publish` sends session lines (a, p, unadv) in order as one client and prints the
broker's replies; it exits 1 if the broker refused a line or the text did not parse.

A broker started with --http-tls too serves https://; pass its certificate (cert.pem in
its data dir, or the federation CA) with --cafile FILE.

On a broker whose [auth] gives principals tokens, act as one: --name NAME with its token
in PADRES_TOKEN (as the padres command takes them); the request then carries
`Authorization: Bearer NAME:TOKEN` and is held to that principal's permits. Without them
the requests are anonymous.
"""

import os

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request


def subscribe(url, text, count, composite, context, headers):
    query = urllib.parse.urlencode({"cs" if composite else "s": text})
    request = urllib.request.Request(f"{url}/api/subscribe?{query}", headers=headers)
    try:
        response = urllib.request.urlopen(request, context=context)
    except urllib.error.HTTPError as refused:
        print(refused.read().decode(), file=sys.stderr)
        return 1
    notifications = 0
    with response:
        # Server-sent events: one "data: {json}" line per event, a blank line after each.
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:"):].strip())
            print(json.dumps(event), flush=True)
            if event.get("type") == "notification":
                notifications += 1
                if count and notifications >= count:
                    return 0
    return 0


def publish(url, lines, context, headers):
    request = urllib.request.Request(
        f"{url}/api/publish",
        data=json.dumps(lines).encode("utf-8"),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, context=context) as response:
            for reply in json.loads(response.read()):
                print(json.dumps(reply), flush=True)
            return 0
    except urllib.error.HTTPError as refused:
        body = refused.read().decode("utf-8")
        try:
            replies = json.loads(body)
            for reply in replies if isinstance(replies, list) else [replies]:
                print(json.dumps(reply), file=sys.stderr)
        except ValueError:
            print(body, file=sys.stderr)
        return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the broker's HTTP listener, e.g. http://127.0.0.1:7781")
    parser.add_argument("--cafile", help="for https://: the broker's certificate or the CA to verify it with")
    parser.add_argument("--name", help="the principal to act as (its token in PADRES_TOKEN)")
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("subscribe", help="print notifications as JSON lines")
    sub.add_argument("filter", help="a subscription, e.g. \"[class,eq,'quote']\"")
    sub.add_argument("--count", type=int, default=0, help="stop after this many notifications")
    sub.add_argument("--composite", action="store_true", help="the filter is a composite subscription")
    pub = commands.add_parser("publish", help="send session lines (a, p, unadv)")
    pub.add_argument("lines", nargs="+", help="e.g. \"p [class,'quote'],[price,120]\"")
    args = parser.parse_args()
    url = args.url.rstrip("/")
    context = ssl.create_default_context(cafile=args.cafile) if args.cafile else None
    headers = {}
    token = os.environ.get("PADRES_TOKEN", "").strip()
    if args.name and not token:
        parser.error("--name needs the principal's token in PADRES_TOKEN")
    if token and not args.name:
        parser.error("PADRES_TOKEN needs --name, the principal it is the token of")
    if args.name:
        headers["Authorization"] = f"Bearer {args.name}:{token}"
    if args.command == "subscribe":
        return subscribe(url, args.filter, args.count, args.composite, context, headers)
    return publish(url, args.lines, context, headers)


if __name__ == "__main__":
    sys.exit(main())

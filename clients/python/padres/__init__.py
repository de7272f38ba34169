"""A client for padres-rs brokers over their HTTP gateway, with Python's standard library only.

A broker serves the gateway with `--http ADDR:PORT --http-gateway`. Messages are written in
the PADRES text syntax, as `padres session` takes them:

    from padres import Broker

    broker = Broker("http://127.0.0.1:7780")
    for event in broker.subscribe("[class,eq,'quote'],[price,>,100]"):
        print(event["attrs"])                  # the publication's attributes, {"class": "quote", ...}
    broker.publish(["[class,'quote'],[price,120]"], advertise="[class,eq,'quote'],[price,isPresent,0]")
    stored = broker.history("[class,eq,'job_status'],[appl,eq,'payroll']", since="1d")
    jobs = broker.workflow_status("payroll", gid="fri")

On a broker whose `[auth]` gives principals tokens, act as one: `Broker(url, name="agent-1",
token=...)` sends `Authorization: Bearer NAME:TOKEN` with every request, and the broker
holds it to that principal's permits. With `--http-tls`, pass the broker's certificate or
the federation CA as `cafile`.
"""

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Broker", "PadresError"]


class PadresError(Exception):
    """The broker refused a request, or could not be reached: `status` is the HTTP status
    (0 when there was no answer) and `message` the broker's reason."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class Broker:
    """One broker's HTTP gateway at `url` (http://HOST:PORT or https://HOST:PORT)."""

    def __init__(self, url, name=None, token=None, cafile=None, timeout=30.0):
        if (name is None) != (token is None):
            raise ValueError("name and token go together: the principal and its token")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {name}:{token}"} if name is not None else {}
        self._context = ssl.create_default_context(cafile=cafile) if cafile else None

    def _open(self, path, data=None, content_type=None, timeout=None):
        headers = dict(self._headers)
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers)
        try:
            return urllib.request.urlopen(request, context=self._context, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as refused:
            raise PadresError(refused.code, _reason(refused.read().decode("utf-8", "replace"))) from None
        except urllib.error.URLError as unreachable:
            raise PadresError(0, f"{self.url}: {unreachable.reason}") from None

    def send(self, lines):
        """Sends session lines (`a ADV`, `p PUB`, `unadv ID`) in order, as one client for the
        length of the request; the broker's reply to each line. Raises PadresError if the
        broker refused one (after the lines before it were taken) or a line did not parse
        (and then nothing was sent)."""
        body = json.dumps(list(lines)).encode("utf-8")
        with self._open("/api/publish", body, "application/json") as response:
            return json.loads(response.read())

    def publish(self, publications, advertise=None):
        """Publishes `publications` (publication texts), under the advertisement `advertise`
        (an advertisement text) made in the same request; the broker's replies."""
        lines = ([f"a {advertise}"] if advertise else []) + [f"p {p}" for p in publications]
        return self.send(lines)

    def subscribe(self, subscription, composite=False, timeout=None):
        """Subscribes, and yields each event as a dict, as `padres session --json` prints
        them: notifications (`{"type": "notification", "sub": ID, "attrs": {...}}`, or a
        composite match's `pubs`, each with its leaf and attrs), and `end_of_history` after the stored publications of a
        subscription that reaches into the past. The subscription lasts as long as the
        iteration: leaving it (break, or closing the generator) ends it. `timeout` bounds
        the wait for each event (None: the broker's keep-alives keep it open)."""
        query = urllib.parse.urlencode({"cs" if composite else "s": subscription})
        response = self._open(f"/api/subscribe?{query}", timeout=timeout or 3600.0)
        try:
            first = True
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[len("data:"):].strip())
                if first and event.get("type") == "reply":
                    first = False
                    continue
                if event.get("type") == "error":
                    raise PadresError(0, event.get("message", "the broker reported an error"))
                yield event
        finally:
            response.close()

    def history(self, subscription, since, until=None):
        """The publications the federation's history stores keep that `subscription`
        selects from `since` (a duration ago such as "1h" or "7d", or an RFC 3339 time) to
        `until` (now if None), oldest first, each as its attributes; and the stores that
        did not answer. Returns (publications, missing)."""
        bounds = f",[time,>=,{_bound(since)}]" + (f",[time,<=,{_bound(until)}]" if until else "")
        found = []
        for event in self.subscribe(subscription + bounds):
            if event.get("type") == "end_of_history":
                return found, event.get("missing", [])
            if event.get("type") == "notification":
                found.append(event["attrs"])
        return found, []

    def workflow_status(self, appl, gid=None, since="1d"):
        """What the history stores say of `appl`'s generations since `since`: for each
        generation (or only `gid`), each job's latest status as a dict (status, attempt,
        exit, agent, reason), as `padres workflow status --json` reads them. Returns
        {gid: {job: status}}."""
        query = urllib.parse.urlencode({"since": since})
        with self._open(f"/api/workflows?{query}") as response:
            found = json.loads(response.read())
        rank = {"dispatched": 0, "started": 1}
        generations = {}
        for status in found.get("statuses", []):
            if status.get("appl") != appl or (gid is not None and status.get("gid") != gid):
                continue
            jobs = generations.setdefault(status.get("gid"), {})
            key = (int(status.get("attempt", 0)), rank.get(status.get("status"), 2))
            seen = jobs.get(status.get("job"))
            if seen is None or key >= seen["_rank"]:
                jobs[status.get("job")] = {
                    "status": status.get("status"),
                    "attempt": int(status.get("attempt", 0)),
                    "exit": status.get("exit"),
                    "agent": status.get("agent"),
                    "reason": status.get("reason"),
                    "_rank": key,
                }
        for jobs in generations.values():
            for job in jobs.values():
                del job["_rank"]
        return generations


def _reason(body):
    """The broker's reason in an error body (JSON, or text)."""
    try:
        value = json.loads(body)
    except ValueError:
        return body.strip()
    if isinstance(value, list):
        errors = [e.get("message", "") for e in value if isinstance(e, dict) and e.get("type") == "error"]
        return "; ".join(errors) or body.strip()
    if isinstance(value, dict):
        return value.get("message", body.strip())
    return body.strip()


def _bound(when):
    """A time bound as a subscription's operand: 'now-1h' for "1h" (resolved by the
    broker), an RFC 3339 time as it is."""
    text = str(when).strip()
    if text and text[-1] in "smhdw" and text[:-1].isdigit():
        return f"'now-{text}'"
    if text.startswith("now-"):
        return f"'{text}'"
    return text

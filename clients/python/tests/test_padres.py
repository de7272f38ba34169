"""The padres client against a real broker: PADRES_URL names its HTTP gateway (started with
--http, --http-gateway and --workflows). tests/e2e_http.rs starts one and runs these."""

import os
import threading
import time
import unittest

from padres import Broker, PadresError

URL = os.environ.get("PADRES_URL", "http://127.0.0.1:7780")
STATUS_AD = (
    "[class,eq,'job_status'],[appl,isPresent,''],[gid,isPresent,''],[job,isPresent,''],"
    "[agent,isPresent,''],[status,isPresent,''],[attempt,isPresent,0],[exit,isPresent,0]"
)


def status(appl, gid, job, state, attempt):
    return (
        f"[class,'job_status'],[appl,'{appl}'],[gid,'{gid}'],[job,'{job}'],[agent,'py'],"
        f"[status,'{state}'],[attempt,{attempt}],[exit,0]"
    )


def until(what, seconds=10.0):
    """What `what()` returns once it is truthy, trying for `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.broker = Broker(URL)

    def test_a_subscriber_iterates_over_what_matches(self):
        got = []

        def listen():
            for event in self.broker.subscribe("[class,eq,'py_quote'],[price,>,100]", timeout=20):
                got.append(event)
                return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        ad = "[class,eq,'py_quote'],[price,isPresent,0]"
        # Until the subscription is in place, publications pass it by: publish until it hears.
        heard = until(lambda: self.broker.publish(["[class,'py_quote'],[price,90]", "[class,'py_quote'],[price,120]"], advertise=ad) and got)
        self.assertTrue(heard, "the subscriber heard nothing")
        self.assertEqual(got[0]["type"], "notification")
        self.assertEqual(got[0]["attrs"]["price"], 120)

    def test_history_and_workflow_status_read_what_the_stores_keep(self):
        replies = self.broker.publish(
            [status("pyapp", "g1", "A", "started", 1), status("pyapp", "g1", "A", "succeeded", 1)],
            advertise=STATUS_AD,
        )
        self.assertEqual([r["type"] for r in replies], ["reply", "reply", "reply"])
        stored = until(lambda: len(self.broker.history("[class,eq,'job_status'],[appl,eq,'pyapp']", since="1h")[0]) == 2)
        self.assertTrue(stored, "the two statuses were not found in history")
        found, missing = self.broker.history("[class,eq,'job_status'],[appl,eq,'pyapp']", since="1h")
        self.assertEqual([p["status"] for p in found], ["started", "succeeded"])
        self.assertEqual(missing, [])
        jobs = self.broker.workflow_status("pyapp")
        self.assertEqual(jobs["g1"]["A"]["status"], "succeeded")
        self.assertEqual(jobs["g1"]["A"]["attempt"], 1)
        self.assertEqual(self.broker.workflow_status("pyapp", gid="other"), {})

    def test_refusals_raise_with_the_brokers_reason(self):
        with self.assertRaises(PadresError) as bad:
            self.broker.send(["p [class,'x'],[n,"])
        self.assertEqual(bad.exception.status, 400)
        with self.assertRaises(PadresError) as unadvertised:
            self.broker.publish(["[class,'never_advertised'],[n,1]"])
        self.assertEqual(unadvertised.exception.status, 422)
        self.assertIn("advertise first", unadvertised.exception.message)
        with self.assertRaises(PadresError) as gone:
            Broker("http://127.0.0.1:9", timeout=2).publish(["[class,'x']"])
        self.assertEqual(gone.exception.status, 0)

    def test_a_principal_comes_with_its_token(self):
        with self.assertRaises(ValueError):
            Broker(URL, name="agent-1")
        broker = Broker(URL, name="agent-1", token="t")
        self.assertEqual(broker._headers["Authorization"], "Bearer agent-1:t")


if __name__ == "__main__":
    unittest.main()

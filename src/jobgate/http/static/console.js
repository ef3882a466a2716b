// jobgate console: refresh the live parts of a page without a reload (no framework, no build
// step, served by jobgate itself). An element with data-live="/dashboard/live/..." is replaced
// by that HTML fragment every data-every seconds while the tab is visible; one request at a
// time, and not while the operator is using a control inside it (a select left open, a link
// being tabbed to). A signed-out session (the fragment redirects to the sign-in page) stops
// refreshing.
(function () {
  "use strict";
  var status = document.getElementById("live-status");

  function mark(text, bad) {
    if (!status) return;
    status.textContent = text;
    status.className = "status " + (bad ? "bad" : "ok");
  }

  function start(el) {
    var every = Math.max(1, Number(el.getAttribute("data-every") || "3")) * 1000;
    var busy = false;
    var stopped = false;

    function tick() {
      if (stopped || busy || document.hidden) return;
      if (el.contains(document.activeElement) && document.activeElement !== el) return;
      busy = true;
      fetch(el.getAttribute("data-live"), {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "text/html" },
      })
        .then(function (answer) {
          if (answer.redirected || answer.status === 401) {
            stopped = true;
            mark("signed out: reload", true);
            return null;
          }
          if (!answer.ok) {
            mark("refresh failed (" + answer.status + ")", true);
            return null;
          }
          return answer.text();
        })
        .then(function (html) {
          if (html !== null) {
            el.innerHTML = html;
            mark("live " + new Date().toLocaleTimeString(), false);
          }
        })
        .catch(function () {
          mark("offline", true);
        })
        .then(function () {
          busy = false;
        });
    }

    setInterval(tick, every);
    document.addEventListener("visibilitychange", tick);
  }

  var live = document.querySelectorAll("[data-live]");
  for (var i = 0; i < live.length; i++) start(live[i]);
  if (live.length) mark("live", false);
})();

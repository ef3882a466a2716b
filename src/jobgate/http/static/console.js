// jobgate console: refresh the live parts of a page without a reload (no framework, no build
// step, served by jobgate itself). An element with data-live="/dashboard/live/..." is replaced
// by that HTML fragment every data-every seconds (or the rate the operator picked in the
// #live-every menu, remembered in this browser), while the tab is visible, one request at a
// time, and not while the operator is using a control inside it (a select left open). A
// signed-out session (the fragment redirects to the sign-in page) stops refreshing.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  var menu = document.getElementById("live-every");
  var KEY = "jobgate.live-every";

  function mark(text, bad) {
    if (!status) return;
    status.textContent = text;
    status.className = "status " + (bad ? "bad" : "ok");
  }

  function chosen() {
    try {
      return window.localStorage.getItem(KEY);
    } catch (e) {
      return null;
    }
  }

  if (menu) {
    var saved = chosen();
    if (saved !== null) menu.value = saved;
    menu.addEventListener("change", function () {
      try {
        window.localStorage.setItem(KEY, menu.value);
      } catch (e) {
        /* private mode: the choice lasts for this page only */
      }
      if (menu.value === "0") mark("paused", false);
    });
  }

  function seconds(el) {
    if (menu) return Number(menu.value);
    return Number(el.getAttribute("data-every") || "3");
  }

  function start(el) {
    var busy = false;
    var stopped = false;
    var last = 0;

    function tick() {
      var every = seconds(el);
      if (stopped || busy || document.hidden || !(every > 0)) return;
      if (Date.now() - last < every * 1000 - 50) return;
      if (el.contains(document.activeElement) && document.activeElement !== el) return;
      busy = true;
      last = Date.now();
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

    last = Date.now();
    setInterval(tick, 500);
    document.addEventListener("visibilitychange", function () {
      last = 0;
      tick();
    });
  }

  var live = document.querySelectorAll("[data-live]");
  for (var i = 0; i < live.length; i++) start(live[i]);
  if (live.length) mark(menu && menu.value === "0" ? "paused" : "live", false);
})();

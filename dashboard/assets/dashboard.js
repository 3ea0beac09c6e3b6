// The bunqueue dashboard's script: it refreshes the page's data without a
// reload (the overview's, from fragment, or the address in the body's
// data-fragment, as the queue page has), and posts Retry and Delete (and
// a table's failed row's Retry) without leaving the page. The pages work
// without it (forms post and come back; reload to refresh).
(function () {
  "use strict";

  var body = document.body;
  var interval = parseInt(body.getAttribute("data-refresh-ms"), 10) || 5000;
  var query = body.getAttribute("data-query") || "";
  var fragment = body.getAttribute("data-fragment") || "fragment" + (query ? "?" + query : "");
  var live = document.getElementById("live");
  var notice = document.getElementById("notice");
  var status = document.getElementById("status");
  var seq = 0; // only the newest refresh is applied
  var timer = null;

  function say(message, bad) {
    if (!notice) {
      return;
    }
    notice.textContent = message;
    notice.hidden = !message;
    notice.className = bad ? "bad" : "";
  }

  function setStatus(text, bad) {
    status.textContent = text;
    status.className = bad ? "bad" : "";
  }

  // refresh fetches the live part of the page, rendered and escaped by the
  // server, and puts it in place, keeping open details open.
  function refresh() {
    var mine = ++seq;
    return fetch(fragment, {
      credentials: "same-origin",
      headers: { "Accept": "text/html" },
      cache: "no-store"
    }).then(function (r) {
      if (!r.ok) {
        throw new Error("HTTP " + r.status);
      }
      return r.text();
    }).then(function (html) {
      if (mine !== seq) {
        return; // a newer refresh is on its way
      }
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("live-data");
      if (!fresh) {
        throw new Error("unexpected answer");
      }
      live.querySelectorAll("details[open]").forEach(function (d) {
        var same = d.id && fresh.querySelector("#" + CSS.escape(d.id));
        if (same) {
          same.open = true;
        }
      });
      live.replaceChildren(document.adoptNode(fresh));
      var when = new Date(fresh.getAttribute("data-generated"));
      setStatus("Updated " + when.toISOString().replace("T", " ").slice(0, 19) + " UTC", false);
    }).catch(function (e) {
      if (mine === seq) {
        setStatus("Could not refresh (" + e.message + "); trying again", true);
      }
    });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(tick, interval);
  }

  function tick() {
    var typing = document.activeElement && live.contains(document.activeElement) &&
      document.activeElement.tagName === "INPUT";
    if (document.hidden || typing) {
      schedule();
      return;
    }
    refresh().then(schedule);
  }

  // Retry and Delete of a failed job, and Retry of a table's failed row,
  // posted with the form's CSRF token.
  live.addEventListener("submit", function (ev) {
    var form = ev.target;
    var action = form.getAttribute("data-action");
    if (!action || action === "pause" || action === "resume") {
      return; // the filter, an ordinary GET; pause and resume post and come back
    }
    ev.preventDefault();
    var row = action === "retry-row";
    var what = row ? "Row " + form.elements.key.value : "Failed job " + form.elements.id.value;
    if (action === "delete" && !window.confirm("Delete " + what.toLowerCase() + " for good?")) {
      return;
    }
    var buttons = form.parentNode.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    seq++; // a refresh already under way shows the job as it was
    fetch(form.getAttribute("action"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json" },
      body: new URLSearchParams(new FormData(form))
    }).then(function (r) {
      return r.json().then(function (res) {
        if (!r.ok || !res.ok) {
          var first = res.rows && res.rows.length ? res.rows[0].error : "";
          throw new Error(res.error || first || "HTTP " + r.status);
        }
        return res;
      });
    }).then(function (res) {
      if (row) {
        say(what + " of the queue " + res.queue + " is retried (Options.RetryRow).", false);
        form.closest("tr").remove();
        return refresh();
      }
      say(action === "retry"
        ? "Failed job " + res.id + " is back in its queue as job " + res.new_job_id + "."
        : "Failed job " + res.id + " was deleted.", false);
      var item = document.getElementById("failed-" + res.id);
      if (item) {
        item.remove();
      }
      return refresh();
    }).catch(function (e) {
      say(what + ": " + e.message, true);
      buttons.forEach(function (b) { b.disabled = false; });
    });
  });

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      tick();
    }
  });
  schedule();
}());

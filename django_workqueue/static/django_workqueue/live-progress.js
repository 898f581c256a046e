/*
 * django-workqueue live progress: keeps progress bars up to date over the job websocket
 * (ws/workqueue/jobs/<id>/, docs/guides/realtime.md). No dependencies, nothing from a CDN.
 *
 * Markup:
 *   <progress class="wq-progress" data-wq-job="42" max="1" value="0"></progress>
 *   <span class="wq-progress-message" data-wq-job="42"></span>
 *   <span class="wq-progress-status" data-wq-job="42"></span>
 *
 * A message or status element without data-wq-job belongs to the page's only job. Each bar
 * also gets data-wq-status, and a "wq:progress" event (detail: the job message) bubbles from
 * it. Optional: data-wq-socket-base="/ws/workqueue/" on the bar when the routes are mounted
 * elsewhere. The socket closes when the job ends; after a dropped connection it reconnects
 * with backoff, but not after a refusal (close codes 4400-4499: log in, or get view_job).
 *
 * data-wq-follow on the bar says how to follow the job: "websocket" (the default), "poll"
 * (GET data-wq-poll-url every data-wq-poll-seconds, which answers the websocket's messages:
 * for pages served where no websocket route exists) or "off" (a finished job).
 *
 * The bar: a total gives it a value; a job that succeeded without one gets a full bar; any
 * other finished job hides it; a running job without a total is indeterminate; a waiting job
 * gets an empty, still bar. A finished job never shows motion.
 */
(function () {
  "use strict";

  var FINISHED = { succeeded: true, failed: true, cancelled: true };
  var DEFAULT_BASE = "/ws/workqueue/";

  function socketUrl(jobId, base) {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    return scheme + window.location.host + (base || DEFAULT_BASE) + "jobs/" + jobId + "/";
  }

  function elements(selector, jobId, onlyJob) {
    var found = [];
    document.querySelectorAll(selector).forEach(function (el) {
      var owner = el.getAttribute("data-wq-job");
      if (owner === jobId || (owner === null && onlyJob)) {
        found.push(el);
      }
    });
    return found;
  }

  function show(jobId, message, onlyJob) {
    var job = message.job;
    var progress = job.progress || {};
    elements("progress.wq-progress", jobId, false).forEach(function (bar) {
      bar.hidden = false;
      if (progress.total) {
        bar.max = progress.total;
        bar.value = Math.min(progress.current || 0, progress.total);
      } else if (job.status === "succeeded") {
        bar.max = 1;
        bar.value = 1;
      } else if (FINISHED[job.status]) {
        bar.hidden = true;
      } else if (job.status === "running") {
        bar.removeAttribute("value"); // busy: indeterminate until a total is reported
      } else {
        bar.max = 1;
        bar.value = 0;
      }
      bar.setAttribute("data-wq-status", job.status);
      bar.dispatchEvent(new CustomEvent("wq:progress", { bubbles: true, detail: message }));
    });
    elements(".wq-progress-message", jobId, onlyJob).forEach(function (el) {
      el.textContent = progress.message || "";
    });
    elements(".wq-progress-status", jobId, onlyJob).forEach(function (el) {
      el.textContent = job.status;
    });
    elements(".wq-progress-count", jobId, onlyJob).forEach(function (el) {
      var hasCurrent = progress.current !== null && progress.current !== undefined;
      el.textContent = hasCurrent
        ? progress.current + (progress.total ? " / " + progress.total : "")
        : "";
    });
  }

  function poll(jobId, url, seconds, onlyJob) {
    var every = Math.max(Number(seconds) || 2, 0.5) * 1000;

    function ask() {
      window.fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (response.status >= 400 && response.status < 500) {
            throw new Error("refused (HTTP " + response.status + ")");
          }
          return response.ok ? response.json() : null;
        })
        .then(function (message) {
          if (message && message.type === "job" && message.job) {
            show(jobId, message, onlyJob);
            if (FINISHED[message.job.status]) {
              return;
            }
          }
          window.setTimeout(ask, every);
        })
        .catch(function (error) {
          if (window.console) {
            window.console.warn("workqueue progress for job " + jobId + ": " + error.message);
          }
        });
    }

    window.setTimeout(ask, every);
  }

  function follow(jobId, base, onlyJob) {
    var delay = 500;
    var finished = false;

    function open() {
      var socket = new WebSocket(socketUrl(jobId, base));
      socket.onopen = function () {
        delay = 500;
      };
      socket.onmessage = function (event) {
        var message;
        try {
          message = JSON.parse(event.data);
        } catch (error) {
          return;
        }
        if (message.type !== "job" || !message.job) {
          return;
        }
        show(jobId, message, onlyJob);
        if (FINISHED[message.job.status]) {
          finished = true;
          socket.close(1000);
        }
      };
      socket.onclose = function (event) {
        if (finished || (event.code >= 4400 && event.code < 4500)) {
          if (!finished && window.console) {
            window.console.warn("workqueue live progress for job " + jobId +
              " refused (code " + event.code + ")");
          }
          return;
        }
        window.setTimeout(open, delay);
        delay = Math.min(delay * 2, 30000);
      };
    }

    open();
  }

  function start(root) {
    var scope = root || document;
    var jobs = {};
    scope.querySelectorAll("progress.wq-progress[data-wq-job]").forEach(function (bar) {
      var id = bar.getAttribute("data-wq-job");
      if (!/^[0-9]+$/.test(id) || bar.hasAttribute("data-wq-following")) {
        return;
      }
      bar.setAttribute("data-wq-following", "");
      if (!(id in jobs)) {
        jobs[id] = bar;
      }
    });
    var ids = Object.keys(jobs);
    ids.forEach(function (id) {
      var bar = jobs[id];
      var how = bar.getAttribute("data-wq-follow") || "websocket";
      if (how === "poll") {
        poll(id, bar.getAttribute("data-wq-poll-url"), bar.getAttribute("data-wq-poll-seconds"),
          ids.length === 1);
      } else if (how === "websocket") {
        follow(id, bar.getAttribute("data-wq-socket-base"), ids.length === 1);
      }
    });
  }

  window.WorkqueueLiveProgress = { start: start };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () {
      start();
    });
  } else {
    start();
  }
})();

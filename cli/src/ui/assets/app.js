// pgjobs ui: the overview's and a live job's updates, times shown relative to now, and ids
// copied. The
// server sends the queues and the chart as HTML it rendered and escaped itself; a death notice
// is shown as text, never as HTML.
"use strict";
(function () {
  // A time as "3 min ago" (or "in 2 h"), the absolute time in the browser's zone on hover.
  const units = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];
  function relative(date) {
    const seconds = Math.round((date.getTime() - Date.now()) / 1000);
    if (Math.abs(seconds) < 5) return "now";
    const [unit, size] = units.find(([, s]) => Math.abs(seconds) >= s);
    const n = Math.floor(Math.abs(seconds) / size);
    return seconds < 0 ? n + " " + unit + " ago" : "in " + n + " " + unit;
  }
  function times(root) {
    for (const t of root.querySelectorAll("time[datetime]")) {
      const date = new Date(t.getAttribute("datetime"));
      if (isNaN(date.getTime())) continue;
      t.textContent = relative(date);
      t.title = date.toLocaleString() + " (" + t.getAttribute("datetime") + ")";
    }
  }
  times(document);
  setInterval(() => times(document), 15000);

  // A copy button puts its id on the clipboard (where the browser allows it).
  document.addEventListener("click", (e) => {
    const button = e.target.closest("button.copy");
    if (!button) return;
    const done = () => { button.textContent = "copied"; setTimeout(() => { button.textContent = "copy"; }, 1500); };
    if (navigator.clipboard) navigator.clipboard.writeText(button.dataset.copy).then(done, () => {});
  });

  // A job's page while the job or a child shown is live: read again every 2 s, the section
  // alone (HTML the server rendered and escaped), until it says nothing shown is live.
  const job = document.getElementById("job");
  if (job && job.dataset.live) {
    const url = location.pathname + (location.search ? location.search + "&" : "?") + "part=job";
    const timer = setInterval(() => {
      fetch(url, { credentials: "same-origin" }).then((r) => (r.ok ? r.text() : null)).then((html) => {
        if (html === null) return;
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("job");
        if (!fresh) return;
        job.replaceChildren(...fresh.childNodes);
        times(job);
        if (!fresh.dataset.live) {
          delete job.dataset.live;
          clearInterval(timer);
        }
      }, () => {});
    }, 2000);
  }

  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const source = new EventSource("/live");
  source.addEventListener("overview", (e) => { live.innerHTML = e.data; times(live); });
  source.addEventListener("dead", (e) => {
    const notices = document.getElementById("notices");
    const line = document.createElement("p");
    let text = e.data;
    try {
      const d = JSON.parse(e.data);
      text = (d.count ? d.count + " jobs" : "a job") + " of queue " + d.queue + " died" + (d.id ? " (" + d.id + ")" : "");
    } catch (_) { /* another sender's payload: shown as it came */ }
    line.textContent = text;
    notices.prepend(line);
    while (notices.children.length > 5) notices.lastChild.remove();
  });
})();

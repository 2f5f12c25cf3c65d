// pgjobs ui: the overview's live updates. The server sends the queues and the chart as HTML
// it rendered and escaped itself; a death notice is shown as text, never as HTML.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const source = new EventSource("/live");
  source.addEventListener("overview", (e) => { live.innerHTML = e.data; });
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

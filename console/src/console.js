// Live updates: when the gateway's event stream says something changed, fetch this page's
// live part again (rendered on the server) and swap it in. One request in flight at most.
(function () {
  const main = () => document.querySelector('main[data-live]');
  if (!main()) return;
  let busy = false, again = false;
  async function reload() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const url = new URL(location.href);
      url.searchParams.set('fragment', '1');
      const res = await fetch(url, { credentials: 'same-origin' });
      if (res.ok) {
        const doc = new DOMParser().parseFromString(await res.text(), 'text/html');
        const fresh = doc.querySelector('main[data-live]');
        const here = main();
        // Keep a filter field the user is typing in.
        if (fresh && here && !here.contains(document.activeElement)) here.replaceWith(fresh);
      }
    } finally {
      busy = false;
      if (again) { again = false; reload(); }
    }
  }
  const events = new EventSource('/console/api/events');
  events.addEventListener('changed', reload);
})();

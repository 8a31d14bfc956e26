// Live regions: an element with data-live polls its own address through htmx (hx-get,
// hx-trigger="every Ns, live-visible from:body"). While the tab is hidden its polls are
// cancelled, so a forgotten tab costs the server nothing; when the tab shows again every live
// region refreshes at once. Loaded as a file (the CSP forbids inline script).
(function () {
  document.addEventListener("htmx:beforeRequest", function (ev) {
    var elt = ev.detail && ev.detail.elt;
    if (document.hidden && elt && elt.hasAttribute && elt.hasAttribute("data-live")) {
      ev.preventDefault();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && document.body) {
      document.body.dispatchEvent(new CustomEvent("live-visible"));
    }
  });
})();

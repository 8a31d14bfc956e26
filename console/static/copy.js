// Copy buttons: a button with data-copy puts its value on the clipboard and says so for a
// moment. Loaded as a file (the CSP forbids inline script); one delegated listener.
(function () {
  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest ? ev.target.closest("button[data-copy]") : null;
    if (!btn || !navigator.clipboard) { return; }
    var label = btn.textContent;
    navigator.clipboard.writeText(btn.getAttribute("data-copy")).then(function () {
      btn.textContent = "copied";
      setTimeout(function () { btn.textContent = label; }, 1500);
    }, function () {});
  });
})();

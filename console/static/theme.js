// Theme: follows the system (prefers-color-scheme) until the user picks one with the toggle;
// the choice is kept in localStorage. Loaded synchronously in <head> so the page never flashes.
(function () {
  var root = document.documentElement;
  var saved = null;
  try { saved = localStorage.getItem("idemops-theme"); } catch (e) {}
  if (saved === "light" || saved === "dark") { root.setAttribute("data-theme", saved); }
  document.addEventListener("DOMContentLoaded", function () {
    var btn = document.getElementById("theme-toggle");
    if (!btn) { return; }
    btn.addEventListener("click", function () {
      var current = root.getAttribute("data-theme");
      if (!current) {
        current = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
      }
      var next = current === "dark" ? "light" : "dark";
      root.setAttribute("data-theme", next);
      try { localStorage.setItem("idemops-theme", next); } catch (e) {}
    });
  });
})();

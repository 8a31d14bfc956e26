// Bulk selection on the key search (River UI #590): the header checkbox ticks every key of the
// page; once all are ticked, the bar offers every key matching the filter. Without JavaScript
// the row checkboxes and "Replay every key of this search…" still work.
(function () {
  document.addEventListener("DOMContentLoaded", function () {
    var all = document.getElementById("select-page");
    var banner = document.getElementById("select-all-banner");
    var picks = document.querySelectorAll("input.bulk-pick");
    if (!all || !banner || picks.length === 0) { return; }
    all.hidden = false;
    function update() {
      var n = 0;
      for (var i = 0; i < picks.length; i++) { if (picks[i].checked) { n++; } }
      all.checked = n === picks.length;
      all.indeterminate = n > 0 && n < picks.length;
      banner.hidden = n !== picks.length;
    }
    all.addEventListener("change", function () {
      for (var i = 0; i < picks.length; i++) { picks[i].checked = all.checked; }
      update();
    });
    for (var i = 0; i < picks.length; i++) { picks[i].addEventListener("change", update); }
    update();
  });
})();

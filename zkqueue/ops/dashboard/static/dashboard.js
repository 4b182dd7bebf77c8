// Refreshes the overview's numbers every 2 seconds from /api/overview (no library, nothing fetched elsewhere).
(function () {
  var table = document.getElementById("queues");
  if (!table) { return; }
  var url = table.getAttribute("data-refresh");
  function update(rows) {
    var known = {};
    rows.forEach(function (r) {
      var tr = table.querySelector('tr[data-path="' + r.path.replace(/"/g, '\\"') + '"]');
      if (!tr) { known.missing = true; return; }
      tr.querySelectorAll("[data-field]").forEach(function (cell) {
        var v = r[cell.getAttribute("data-field")];
        cell.textContent = (v === null || v === undefined) ? "" : v;
      });
    });
    if (known.missing) { window.location.reload(); }  // a new queue appeared: render it with its chart
  }
  function tick() {
    fetch(url, {cache: "no-store"}).then(function (r) { return r.json(); }).then(update).catch(function () {});
  }
  setInterval(tick, 2000);
  setInterval(function () { window.location.reload(); }, 60000);  // the charts, once a minute
})();

// Auto-refresh for the host page: reload every 5 s while the box is ticked
// (remembered in this browser). The page works without it: Refresh is a link.
(function () {
  var label = document.getElementById("auto"), box = document.getElementById("auto-box");
  if (!label || !box) return;
  label.hidden = false;
  var key = "relay-host-auto-refresh", timer = null;
  function arm() {
    clearTimeout(timer);
    if (box.checked) timer = setTimeout(function () { location.reload(); }, 5000);
  }
  try { box.checked = localStorage.getItem(key) === "1"; } catch (e) {}
  box.addEventListener("change", function () {
    try { localStorage.setItem(key, box.checked ? "1" : "0"); } catch (e) {}
    arm();
  });
  arm();
})();

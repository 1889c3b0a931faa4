// The relay console's script: conveniences only, every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Copy buttons: data-copy names the element whose text (or value) to copy.
  if (!navigator.clipboard) return;
  document.querySelectorAll("button.copy[data-copy]").forEach(function (btn) {
    var target = document.getElementById(btn.dataset.copy);
    if (!target) return;
    btn.hidden = false;
    btn.addEventListener("click", function () {
      var text = target.value !== undefined ? target.value : target.textContent;
      navigator.clipboard.writeText(text.trim()).then(function () {
        btn.textContent = "Copied";
        btn.classList.add("copied");
        setTimeout(function () { btn.textContent = "Copy"; btn.classList.remove("copied"); }, 1500);
      });
    });
  });
  // Select a read-only URL whole when it is clicked.
  document.querySelectorAll("input.url[readonly]").forEach(function (el) {
    el.addEventListener("focus", function () { el.select(); });
  });
});

// The team pages' inline editing: Enter in a cell saves its row, a changed cell is marked.
//
// Loaded with defer on the team pages only, next to inbox.js. Each row of the skills
// matrix is one form[data-team-form]; its cells are tied to it with the form attribute.
// The cell that saved gets focus back when the page returns (the view puts autofocus on it).
(function () {
  "use strict";

  function remember(control) {
    var form = control.form;
    if (!form || !form.hasAttribute("data-team-form")) return null;
    var focus = form.querySelector("[data-team-focus]");
    if (focus) focus.value = control.name;
    return form;
  }

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || event.defaultPrevented || event.isComposing) return;
    if (event.ctrlKey || event.metaKey || event.altKey || event.shiftKey) return;
    var control = event.target;
    if (control.tagName !== "SELECT" && control.tagName !== "INPUT") return;
    var form = remember(control);
    if (!form) return;
    event.preventDefault();
    form.requestSubmit();
  });

  document.addEventListener("change", function (event) {
    var control = event.target;
    if (!control.form || !control.form.hasAttribute("data-team-form")) return;
    var cell = control.closest("td");
    if (cell) cell.classList.add("changed");
  });
})();

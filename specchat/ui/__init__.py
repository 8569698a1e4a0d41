"""The Textual app: screens and widgets over services it is handed (``ui.services.AppServices``)."""

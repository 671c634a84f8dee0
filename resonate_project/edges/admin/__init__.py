"""The admin kit every app's admin stands on, and the operator's console pages built with it."""

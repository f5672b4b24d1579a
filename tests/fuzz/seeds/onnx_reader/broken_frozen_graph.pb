

inputPlaceholder"
%

serve

inputPlaceholder"